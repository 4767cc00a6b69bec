// Command ociwrap is an OCI runtime that drops capabilities the host cannot grant, then runs runc.
//
// Some machines (containers, sandboxes) run Docker with a capability bounding set that lacks
// CAP_SYS_RESOURCE. `docker run --privileged`, which kind uses for its node container, asks for
// every capability, and runc fails with "unable to apply caps: operation not permitted". This
// wrapper, registered as dockerd's default runtime by hack/kind/docker.sh only where that quirk
// is detected, rewrites the bundle's config.json on `create` and `run` so that no capability list
// holds a capability missing from this process's bounding set (and likewise the process file of
// `exec`, which `docker exec --privileged` uses), and then execs the real runc with the same
// arguments. Every other command is passed through untouched.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames maps capability numbers to the names the OCI spec uses (linux/capability.h).
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// missingCaps returns the named capabilities absent from this process's bounding set (CapBnd).
func missingCaps() (map[string]bool, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			bnd, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				return nil, err
			}
			missing := map[string]bool{}
			for i, name := range capNames {
				if bnd&(1<<uint(i)) == 0 {
					missing[name] = true
				}
			}
			return missing, nil
		}
	}
	return nil, fmt.Errorf("no CapBnd line in /proc/self/status")
}

// bundleOf returns the command (create, run, exec, ...), the bundle directory and the process file
// (exec --process) of runc's arguments.
func bundleOf(args []string) (command, bundle, process string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case command == "" && !strings.HasPrefix(a, "-"):
			command = a
		case a == "--bundle" || a == "-b":
			if i+1 < len(args) {
				bundle = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		case command == "exec" && (a == "--process" || a == "-p"):
			if i+1 < len(args) {
				process = args[i+1]
				i++
			}
		case command == "exec" && strings.HasPrefix(a, "--process="):
			process = strings.TrimPrefix(a, "--process=")
		case command == "" && (a == "--root" || a == "--log" || a == "--log-format" || a == "--criu"):
			i++ // a global flag's value, not the command
		}
	}
	if bundle == "" {
		bundle = "."
	}
	return command, bundle, process
}

// dropCaps removes the missing capabilities from every list in process.capabilities of a bundle's
// config.json, or in capabilities of a process file (whole is false).
func dropCaps(path string, whole bool, missing map[string]bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep 64-bit limits exact
	var spec map[string]any
	if err := dec.Decode(&spec); err != nil {
		return err
	}
	process := spec
	if whole {
		process, _ = spec["process"].(map[string]any)
	}
	caps, _ := process["capabilities"].(map[string]any)
	if caps == nil {
		return nil
	}
	changed := false
	for kind, list := range caps {
		names, _ := list.([]any)
		kept := make([]any, 0, len(names))
		for _, n := range names {
			if s, _ := n.(string); missing[s] {
				changed = true
				continue
			}
			kept = append(kept, n)
		}
		caps[kind] = kept
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	tmp := path + ".ociwrap"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func main() {
	args := os.Args[1:]
	command, bundle, process := bundleOf(args)
	if command == "create" || command == "run" || (command == "exec" && process != "") {
		missing, err := missingCaps()
		if err == nil && len(missing) > 0 {
			if command == "exec" {
				err = dropCaps(process, false, missing)
			} else {
				err = dropCaps(filepath.Join(bundle, "config.json"), true, missing)
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "ociwrap: %v\n", err)
			os.Exit(1)
		}
	}
	runc := os.Getenv("OCIWRAP_RUNC")
	if runc == "" {
		var err error
		if runc, err = exec.LookPath("runc"); err != nil {
			fmt.Fprintf(os.Stderr, "ociwrap: %v\n", err)
			os.Exit(1)
		}
	}
	err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "ociwrap: exec %s: %v\n", runc, err)
	os.Exit(1)
}
