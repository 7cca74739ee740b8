package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kpng/kpng/pki"
)

// certsCommand is `kpng certs`: the CA and certificates of the split
// deployment (deploy/split), as the two Secrets its pods mount.
func certsCommand() *cobra.Command {
	var o certOptions
	cmd := &cobra.Command{
		Use:   "certs --brain-name NAME [--brain-name NAME...]",
		Short: "Create a CA and the brain's and agents' certificates, as the Secrets deploy/split mounts",
		Long: `Create a new CA, a server certificate for the brain (naming every
--brain-name: the DNS names or IP addresses agents dial) and a client
certificate for the agents, and write them as two Secrets (kpng-brain-tls and
kpng-agent-tls, each with tls.crt, tls.key and ca.crt) for kubectl apply -f.

To rotate: run it again and apply; the brain and the agents read the new files
at their next connection, without a restart. (Apply both Secrets together: a
new CA is trusted only by those who have it.)`,
		Example: `  kpng certs --brain-name cp.example.internal --brain-name 192.0.2.10 | kubectl apply -f -`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if o.output != "" && o.output != "-" {
				f, err := os.OpenFile(o.output, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
				if err != nil {
					return err
				}
				defer f.Close()
				out = f
			}
			return writeCertSecrets(out, o, time.Now())
		},
	}
	cmd.Flags().StringSliceVar(&o.brainNames, "brain-name", nil, "a name or IP address the agents dial the brain at (repeat for several)")
	cmd.Flags().StringVar(&o.namespace, "namespace", "kube-system", "the Secrets' namespace")
	cmd.Flags().DurationVar(&o.validity, "validity", 365*24*time.Hour, "how long the certificates are valid")
	cmd.Flags().StringVarP(&o.output, "output", "o", "-", "file to write the Secrets to (mode 0600); - for standard output")
	return cmd
}

type certOptions struct {
	brainNames []string
	namespace  string
	validity   time.Duration
	output     string
}

// writeCertSecrets creates the CA and both certificates, valid from now,
// and writes the Secrets as a YAML stream.
func writeCertSecrets(w io.Writer, o certOptions, now time.Time) error {
	if len(o.brainNames) == 0 {
		return errors.New("--brain-name is required: the name or address agents dial the brain at (its certificate must name it)")
	}
	if o.validity <= 0 {
		return fmt.Errorf("--validity %v: must be positive", o.validity)
	}
	secrets, err := pki.SplitSecrets(o.brainNames, o.namespace, o.validity, now)
	if err != nil {
		return err
	}
	return pki.WriteYAML(w, secrets)
}
