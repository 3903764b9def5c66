// probe is the node tests' workload: a static binary in an otherwise empty image, so pods need no registry.
//
//	probe serve ADDR TEXT               answer every HTTP request with TEXT
//	probe STEP ARGS [-- STEP ARGS ...]  run checks in order, each retried for up to 90 s; exit 0 when all pass
//
// Steps: `lookup NAME` (resolves), `get URL WANT` (HTTP 200 whose body contains WANT), `api` (the mounted
// ServiceAccount token is accepted by the API server at https://kubernetes.default.svc).
// What happened is written to /dev/termination-log, which the kubelet copies into the pod's status.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	if len(os.Args) >= 4 && os.Args[1] == "serve" {
		text := os.Args[3]
		http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, text) })
		if err := http.ListenAndServe(os.Args[2], nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	var report []string
	ok := true
	for _, step := range split(os.Args[1:]) {
		err := retry(step)
		line := fmt.Sprintf("%s: ok", strings.Join(step, " "))
		if err != nil {
			ok = false
			line = fmt.Sprintf("%s: FAILED: %v", strings.Join(step, " "), err)
		}
		report = append(report, line)
		fmt.Println(line)
	}
	_ = os.WriteFile("/dev/termination-log", []byte(strings.Join(report, "\n")), 0o644)
	if !ok {
		os.Exit(1)
	}
}

func split(args []string) [][]string {
	var steps [][]string
	current := []string{}
	for _, arg := range args {
		if arg == "--" {
			steps = append(steps, current)
			current = []string{}
			continue
		}
		current = append(current, arg)
	}
	return append(steps, current)
}

func retry(step []string) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := run(step)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

func run(step []string) error {
	switch {
	case len(step) == 2 && step[0] == "lookup":
		addrs, err := net.LookupHost(step[1])
		if err == nil && len(addrs) == 0 {
			err = errors.New("no address")
		}
		return err
	case len(step) == 3 && step[0] == "get":
		return get(http.DefaultClient, step[1], "", step[2])
	case len(step) == 1 && step[0] == "api":
		return api()
	}
	return fmt.Errorf("unknown step %q", step)
}

func api() error {
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return errors.New("ca.crt holds no certificate")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return get(client, "https://kubernetes.default.svc/api", strings.TrimSpace(string(token)), "APIVersions")
}

func get(client *http.Client, url, token, want string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("HTTP %d, body %.200q does not contain %q", resp.StatusCode, body, want)
	}
	return nil
}
