package hostcheck

import (
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// Process is a daemon under test (containerd, dockerd, a Nomad agent):
// started in a process group of its own, waited for, and stopped the one
// way every harness stops its daemon.
type Process struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// StartProcess starts cmd as the daemon name ("containerd"), in a process
// group of its own.
func StartProcess(name string, cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the daemon's process ID (and its process group's).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the daemon has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// WaitErr is how the daemon exited; valid once Exited is closed.
func (p *Process) WaitErr() error { return p.err }

// Stop ends the daemon: one that has exited already is an error (it was
// to run until now); otherwise before runs (if not nil: what must be done
// while the daemon still answers, such as deleting its containers), sig is
// sent and the daemon gets timeout to exit (logf reports how it did);
// then whatever is left of its process group is killed.
func (p *Process) Stop(sig syscall.Signal, timeout time.Duration, before func() error, logf func(string, ...any)) []error {
	var errs []error
	pid := p.Pid()
	select {
	case <-p.exited:
		errs = append(errs, fmt.Errorf("%s had already exited before Stop: %v", p.name, p.err))
	default:
		if before != nil {
			if err := before(); err != nil {
				errs = append(errs, err)
			}
		}
		_ = syscall.Kill(pid, sig)
		select {
		case <-p.exited:
			logf("%s exited after %s (%v)", p.name, signalName(sig), p.err)
		case <-time.After(timeout):
			errs = append(errs, fmt.Errorf("%s pid %d still running %v after %s; sent SIGKILL to its process group", p.name, pid, timeout, signalName(sig)))
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		errs = append(errs, fmt.Errorf("%s pid %d did not exit after SIGKILL", p.name, pid))
	}
	return errs
}

// signalName is the signal as kill(1) names it: "SIGTERM".
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return sig.String()
}

// TB is the part of testing.TB a harness's process needs (the package
// keeps to what the static probe may link).
type TB interface {
	Cleanup(func())
	Errorf(format string, args ...any)
	Failed() bool
}

// StopAtEnd has t stop the daemon when it ends (stop is the harness's Stop:
// the daemon's cleanup, then Process.Stop), and print the daemon's log
// (dumpLog) if t failed.
func (p *Process) StopAtEnd(t TB, stop func() error, dumpLog func()) {
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stopping %s: %v", p.name, err)
		}
		if t.Failed() {
			dumpLog()
		}
	})
}
