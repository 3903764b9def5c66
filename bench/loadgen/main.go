// Command loadgen sends the same OTLP/HTTP push to a receiver, either at a fixed concurrency (each
// keep-alive connection sends its next push when the previous one is answered) or at a fixed rate
// (pushes scheduled on a clock, latency measured from the scheduled time so a stalled server is not
// hidden). It is compiled so that it costs the machine far less CPU than the servers it measures.
//
// Protocol with bench/receiver_vs_collector.py: after the warm-up it prints the line "MEASURE" on stdout,
// at the end "DONE" and then one JSON line with the figures of the measured period (and the 200s of
// the warm-up, which also produced Kafka records).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// runID makes every run's client instance ids new to the receiver, whose push-interval rate limit would
// otherwise refuse a second push of the same id within the interval.
var runID = time.Now().UnixNano()

type result struct {
	Seconds    float64        `json:"seconds"`
	OK         int64          `json:"ok"`
	WarmupOK   int64          `json:"warmup_ok"`
	Statuses   map[string]int `json:"statuses"`
	Errors     int64          `json:"errors"`
	P50ms      float64        `json:"p50_ms"`
	P99ms      float64        `json:"p99_ms"`
	Sent       int64          `json:"sent"`
	Late       int64          `json:"late"`
	PushesPerS float64        `json:"pushes_per_s"`
	// Each connection's first push (closed loop): whether a tail is the connections' start (accept) or not.
	FirstP50ms float64 `json:"first_p50_ms"`
	FirstP99ms float64 `json:"first_p99_ms"`
	MaxMs      float64 `json:"max_ms"`
}

type recorder struct {
	mu        sync.Mutex
	latencies []float64
	first     []float64 // the latency of each connection's first push (closed loop)
	statuses  map[int]int
	ok        atomic.Int64
	errors    atomic.Int64
}

func (r *recorder) add(status int, latency time.Duration) {
	r.mu.Lock()
	r.latencies = append(r.latencies, float64(latency.Microseconds())/1000.0)
	r.statuses[status]++
	r.mu.Unlock()
	if status == 200 {
		r.ok.Add(1)
	}
}

type conn struct {
	c   net.Conn
	br  *bufio.Reader
	buf []byte
}

func dial(addr string) (*conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, br: bufio.NewReaderSize(c, 16384)}, nil
}

// source is one client address and the push body that carries it (as its resource attribute
// k8s.pod.ip), for a run with Kubernetes attribution: the receiver reads the address from the broker
// plugin's header, the Collector's k8sattributes from the resource attribute, so both find the same pod.
type source struct {
	address string
	body    []byte
}

// request builds one push with its own client instance id, as the broker plugin sends it.
func request(body []byte, gzip bool, token string, id string, address string) []byte {
	var b bytes.Buffer
	b.WriteString("POST /v1/metrics HTTP/1.1\r\nHost: bench\r\nContent-Type: application/x-protobuf\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	b.WriteString("Authorization: Bearer " + token + "\r\n")
	b.WriteString("kct-client-instance-id: " + id + "\r\n")
	b.WriteString("kct-client-id: bench-producer\r\nkct-client-software-name: librdkafka\r\n")
	b.WriteString("kct-client-software-version: 2.16.0\r\nkct-client-source-address: " + address + "\r\n")
	b.WriteString("kct-client-source-port: 51234\r\nkct-principal: User:bench\r\nkct-broker-id: 1\r\n")
	b.WriteString("kct-terminating: false\r\nkct-push-interval-ms: 60000\r\n")
	if gzip {
		b.WriteString("Content-Encoding: gzip\r\n")
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

// roundTrip writes one request and reads the status and body of its answer (Content-Length framed).
func (c *conn) roundTrip(req []byte) (int, error) {
	if _, err := c.c.Write(req); err != nil {
		return 0, err
	}
	status, length := 0, 0
	for first := true; ; first = false {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if first {
			if len(line) < 12 {
				return 0, fmt.Errorf("short status line %q", line)
			}
			status, _ = strconv.Atoi(string(line[9:12]))
			continue
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > 15 && bytes.EqualFold(line[:15], []byte("content-length:")) {
			length, _ = strconv.Atoi(string(bytes.TrimSpace(line[15:])))
		}
	}
	if length > 0 {
		if cap(c.buf) < length {
			c.buf = make([]byte, length)
		}
		if _, err := ioReadFull(c.br, c.buf[:length]); err != nil {
			return 0, err
		}
	}
	return status, nil
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

type settings struct {
	addr, token    string
	body           []byte
	sources        []source      // when set, push k goes out as sources[k % len] (address and body)
	next           *atomic.Int64 // pushes started, to pick the next source
	gzip           bool
	connections    int
	rate           float64
	warmup, length time.Duration
}

func (s *settings) request(id string) []byte {
	if len(s.sources) == 0 {
		return request(s.body, s.gzip, s.token, id, "10.0.0.7")
	}
	src := s.sources[int(s.next.Add(1)-1)%len(s.sources)]
	return request(src.body, s.gzip, s.token, id, src.address)
}

// readSources reads lines "ADDRESS BODY-FILE".
func readSources(path string) ([]source, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []source
	for _, line := range strings.Split(strings.TrimSpace(string(text)), "\n") {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s: want \"ADDRESS BODY-FILE\", got %q", path, line)
		}
		body, err := os.ReadFile(fields[1])
		if err != nil {
			return nil, err
		}
		out = append(out, source{address: fields[0], body: body})
	}
	return out, nil
}

// closedLoop: every connection sends its next push as soon as the previous one is answered.
func closedLoop(s *settings, until time.Time, rec *recorder, idBase int) {
	var wg sync.WaitGroup
	for i := 0; i < s.connections; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var c *conn
			for n := 0; time.Now().Before(until); n++ {
				if c == nil {
					var err error
					if c, err = dial(s.addr); err != nil {
						rec.errors.Add(1)
						time.Sleep(10 * time.Millisecond)
						continue
					}
				}
				req := s.request(fmt.Sprintf("bench-%x-%d-%d-%d", runID, idBase, i, n))
				started := time.Now()
				status, err := c.roundTrip(req)
				if err != nil {
					rec.errors.Add(1)
					c.c.Close()
					c = nil
					continue
				}
				rec.add(status, time.Since(started))
				if n == 0 {
					rec.mu.Lock()
					rec.first = append(rec.first, float64(time.Since(started).Microseconds())/1000.0)
					rec.mu.Unlock()
				}
				if status == 429 || status == 503 {
					time.Sleep(50 * time.Millisecond)
				}
			}
			if c != nil {
				c.c.Close()
			}
		}(i)
	}
	wg.Wait()
}

// openLoop: pushes scheduled every 1/rate s over a pool of connections; latency from the scheduled time.
func openLoop(s *settings, until time.Time, rec *recorder, idBase int, late *atomic.Int64, sent *atomic.Int64) {
	slots := make(chan time.Time, s.connections*4)
	var wg sync.WaitGroup
	for i := 0; i < s.connections; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var c *conn
			n := 0
			for scheduled := range slots {
				if c == nil {
					var err error
					if c, err = dial(s.addr); err != nil {
						rec.errors.Add(1)
						continue
					}
				}
				n++
				req := s.request(fmt.Sprintf("bench-%x-%d-%d-%d", runID, idBase, i, n))
				status, err := c.roundTrip(req)
				if err != nil {
					rec.errors.Add(1)
					c.c.Close()
					c = nil
					continue
				}
				rec.add(status, time.Since(scheduled))
			}
			if c != nil {
				c.c.Close()
			}
		}(i)
	}
	interval := time.Duration(float64(time.Second) / s.rate)
	next := time.Now()
	for next.Before(until) {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		select {
		case slots <- next:
			sent.Add(1)
		default:
			late.Add(1) // every connection busy and the queue full: the server cannot keep the rate
		}
		next = next.Add(interval)
	}
	close(slots)
	wg.Wait()
}

func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)))
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

func run(s *settings, idBase int, late, sent *atomic.Int64) *recorder {
	rec := &recorder{statuses: map[int]int{}}
	until := time.Now().Add(s.length)
	if s.rate > 0 {
		openLoop(s, until, rec, idBase, late, sent)
	} else {
		closedLoop(s, until, rec, idBase)
	}
	return rec
}

func main() {
	s := settings{next: new(atomic.Int64)}
	var bodyPath, sourcesPath string
	var seconds, warmup float64
	flag.StringVar(&s.addr, "addr", "127.0.0.1:4318", "host:port of the server")
	flag.StringVar(&s.token, "token", "bench-token", "bearer token")
	flag.StringVar(&bodyPath, "body", "", "file with the request body (already compressed when -gzip)")
	flag.BoolVar(&s.gzip, "gzip", false, "send Content-Encoding: gzip")
	flag.IntVar(&s.connections, "connections", 32, "keep-alive connections")
	flag.Float64Var(&s.rate, "rate", 0, "pushes per second (0: as fast as the connections are answered)")
	flag.Float64Var(&seconds, "seconds", 10, "measured seconds")
	flag.Float64Var(&warmup, "warmup", 2, "unmeasured seconds first")
	flag.StringVar(&sourcesPath, "sources", "", "file of lines \"ADDRESS BODY-FILE\": pushes cycle through them "+
		"(instead of -body and the address 10.0.0.7)")
	flag.Parse()
	var err error
	if sourcesPath != "" {
		s.sources, err = readSources(sourcesPath)
	} else {
		s.body, err = os.ReadFile(bodyPath)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var late, sent atomic.Int64
	warmOK := int64(0)
	if warmup > 0 {
		w := s
		w.length = time.Duration(warmup * float64(time.Second))
		warmOK = run(&w, 1, &late, &sent).ok.Load()
	}
	late.Store(0)
	sent.Store(0)
	fmt.Println("MEASURE")
	started := time.Now()
	s.length = time.Duration(seconds * float64(time.Second))
	rec := run(&s, 2, &late, &sent)
	elapsed := time.Since(started).Seconds()
	fmt.Println("DONE")
	sort.Float64s(rec.latencies)
	sort.Float64s(rec.first)
	statuses := map[string]int{}
	for k, v := range rec.statuses {
		statuses[strconv.Itoa(k)] = v
	}
	out := result{
		Seconds: elapsed, OK: rec.ok.Load(), WarmupOK: warmOK, Statuses: statuses, Errors: rec.errors.Load(),
		P50ms: percentile(rec.latencies, 0.50), P99ms: percentile(rec.latencies, 0.99),
		Sent: sent.Load(), Late: late.Load(), PushesPerS: float64(rec.ok.Load()) / elapsed,
		FirstP50ms: percentile(rec.first, 0.50), FirstP99ms: percentile(rec.first, 0.99),
		MaxMs: percentile(rec.latencies, 1.0),
	}
	enc, _ := json.Marshal(out)
	fmt.Println(string(enc))
}
