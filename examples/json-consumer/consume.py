#!/usr/bin/env python3
"""Follow a node's view from kpng, in any language: here, Python's standard
library only.

kpng writes one JSON document per revision of the view (a localv1 NodeState,
protobuf JSON field names, zero values omitted):

    kpng kube to-file --node-name node-1 --format json --follow \
        | python3 examples/json-consumer/consume.py

This script prints, per revision, the services that appeared, changed or
went, and the endpoints that cluster traffic uses.
"""
import json
import sys


def key(se):
    svc = se["service"]
    return "%s/%s/%s" % (svc["namespace"], svc["name"], svc.get("family", "IPV4").lower())


def describe(se):
    svc = se["service"]
    eps = [
        "%s:%s" % (ep["ip"], ep.get("port", 0))
        for ep in se.get("endpoints", [])
        if ep.get("inClusterSet")
    ]
    ports = ",".join(str(p.get("port", 0)) for p in svc.get("ports", []))
    return "%s %s:%s -> %s" % (key(se), svc["clusterIp"], ports, " ".join(eps) or "(none)")


def main():
    previous = {}
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        state = json.loads(line)
        current = {key(se): se for se in state.get("services", [])}
        print("# revision %s of %s" % (state.get("revision", 0), state["nodeName"]))
        for k in sorted(current):
            if k not in previous:
                print("+ " + describe(current[k]))
            elif current[k] != previous[k]:
                print("~ " + describe(current[k]))
        for k in sorted(previous):
            if k not in current:
                print("- " + k)
        sys.stdout.flush()
        previous = current


if __name__ == "__main__":
    main()
