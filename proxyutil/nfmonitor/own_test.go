package nfmonitor

import (
	"encoding/binary"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// notPID is a pid no process here has (above the kernel's pid_max limit).
const notPID = 1<<22 + 7

// TestOwnSocket: in a PID namespace of its own the kernel's pid for the
// writer is no pid of ours; the socket's port id tells.
func TestOwnSocket(t *testing.T) {
	const port = 0x8000_1234
	if isOwn(notPID, port) {
		t.Fatal("an unregistered port id counts as ours")
	}
	forget := OwnSocket(port)
	also := OwnSocket(port)
	if !isOwn(notPID, port) {
		t.Fatal("a registered socket's port id does not count as ours")
	}
	forget()
	forget() // twice is once
	if !isOwn(notPID, port) {
		t.Fatal("the port id stopped counting while a second socket still has it")
	}
	also()
	if isOwn(notPID, port) {
		t.Fatal("a forgotten port id still counts as ours")
	}
	// A command's first socket has its pid for port id.
	Started(notPID - 1)
	if !isOwn(notPID, notPID-1) {
		t.Fatal("a started command's port id does not count as ours")
	}
}

// TestDecodeGeneration: the end of a transaction carries the writer's pid
// (an attribute) and its socket's port id (the message header).
func TestDecodeGeneration(t *testing.T) {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	ae.Uint32(unix.NFTA_GEN_ID, 9)
	ae.Uint32(unix.NFTA_GEN_PROC_PID, 4242)
	attrs, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	m := netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysNFTables<<8 | unix.NFT_MSG_NEWGEN), PID: 77},
		Data:   append([]byte{unix.AF_UNSPEC, 0, 0, 0}, attrs...),
	}
	_, gen, ok := decode(m)
	if !ok || gen == nil {
		t.Fatalf("decode: ok=%v gen=%v", ok, gen)
	}
	if gen.pid != 4242 || gen.portID != 77 {
		t.Fatalf("got pid %d port id %d; want 4242 and 77", gen.pid, gen.portID)
	}
}
