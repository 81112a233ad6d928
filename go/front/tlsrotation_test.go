package front

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLocalCredentialsCheck(t *testing.T) {
	cases := []struct {
		kind  localKind
		local net.Addr // the address the connection arrived at
		ok    bool
	}{
		{localTCP, &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}, true},
		// grpc-core takes 127.0.0.1 and ::1 only, not all of 127/8.
		{localTCP, &net.TCPAddr{IP: net.ParseIP("127.9.9.9"), Port: 1}, false},
		{localTCP, &net.TCPAddr{IP: net.ParseIP("127.0.0.2"), Port: 1}, false},
		{localTCP, &net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.2"), Port: 1}, false},
		{localTCP, &net.TCPAddr{IP: net.ParseIP("::1"), Port: 1}, true},
		{localTCP, &net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.1"), Port: 1}, true},
		{localTCP, &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 1}, false},
		{localTCP, &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1}, false},
		{localTCP, &net.UnixAddr{Name: "", Net: "unix"}, false},
		{localUDS, &net.UnixAddr{Name: "", Net: "unix"}, true},
		{localUDS, &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}, false},
	}
	for _, c := range cases {
		if err := checkLocal(c.kind, c.local); (err == nil) != c.ok {
			t.Errorf("kind %d to %v: got %v, want ok=%v", c.kind, c.local, err, c.ok)
		}
	}
}

func materialDoc(key, chain []byte) []byte {
	b, _ := json.Marshal(map[string]any{"pairs": [][2]string{{base64.StdEncoding.EncodeToString(key), base64.StdEncoding.EncodeToString(chain)}}})
	return b
}

func leafName(cfg *tls.Config) string {
	leaf, _ := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	return leaf.Subject.CommonName
}

func TestFetcherAnswersAndTimeouts(t *testing.T) {
	p := newTestPKI(t)
	renewed := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "renewed"}, DNSNames: []string{"localhost"}}, p.ca)
	old := fetchTimeout
	fetchTimeout = 200 * time.Millisecond
	defer func() { fetchTimeout = old }()

	refresh := fetchRefresh(7)
	answer := func(doc []byte) {
		id, source, ok := NextFetch(time.Second)
		if !ok || source != 7 {
			t.Errorf("NextFetch: %d, %d, %v", id, source, ok)
			return
		}
		FetchDone(id, doc)
		FetchDone(id, doc) // a second answer is dropped
	}
	go answer(materialDoc(renewed.key, renewed.cert))
	if m := refresh(); m == nil || len(m.Pairs) != 1 {
		t.Fatalf("answered fetch: got %v", m)
	}
	go answer(nil)
	if m := refresh(); m != nil {
		t.Errorf("None answer: got %v, want nil (keep)", m)
	}
	// Nobody answers: the handshake gives up after fetchTimeout.
	start := time.Now()
	if m := refresh(); m != nil || time.Since(start) < fetchTimeout {
		t.Errorf("unanswered fetch: got %v after %v", m, time.Since(start))
	}
	// Until the fetcher answers, handshakes don't wait for it.
	start = time.Now()
	if m := refresh(); m != nil || time.Since(start) > fetchTimeout/2 {
		t.Errorf("while the fetch is late: got %v after %v, want nil at once", m, time.Since(start))
	}
	// Its late answer serves the next handshake, which asks no more.
	answer(materialDoc(renewed.key, renewed.cert))
	if m := refresh(); m == nil {
		t.Error("the late answer was not used")
	}
	go answer(nil)
	if m := refresh(); m != nil {
		t.Errorf("after the late answer, fetches wait again: got %v", m)
	}
	FetchDone(1<<60, nil) // an unknown request: dropped
}

func TestSourceKeepsCurrentOnBadMaterial(t *testing.T) {
	p := newTestPKI(t)
	renewed := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "renewed"}}, p.ca)
	sec, err := ParseTLS([]byte(tlsDoc(p.server.key, p.server.cert, nil, false)))
	if err != nil {
		t.Fatal(err)
	}
	next := &tlsMaterial{Pairs: [][2][]byte{{p.server.key, renewed.cert}}} // mismatched
	sec.source.refresh = func() *tlsMaterial { return next }
	if got := leafName(sec.source.forHandshake()); got != "localhost" {
		t.Errorf("mismatched update: serving %q, want localhost", got)
	}
	next = &tlsMaterial{Pairs: [][2][]byte{{renewed.key, renewed.cert}}}
	if got := leafName(sec.source.forHandshake()); got != "renewed" {
		t.Errorf("good update: serving %q, want renewed", got)
	}
	if err := sec.Update(materialDoc(p.server.key, renewed.cert)); err == nil {
		t.Error("Update took a mismatched pair")
	}
	var plain *PortSecurity
	if err := plain.Update(materialDoc(renewed.key, renewed.cert)); err == nil {
		t.Error("Update of plaintext succeeded")
	}
}

// writeSecret lays key and chain out as Kubernetes mounts a secret and
// swaps the ..data link to them.
func writeSecret(t *testing.T, dir, gen string, key, chain []byte) {
	t.Helper()
	d := filepath.Join(dir, ".."+gen)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tls.key": key, "tls.crt": chain} {
		if err := os.WriteFile(filepath.Join(d, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(".."+gen, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestFilesFollowSymlinkSwaps(t *testing.T) {
	p := newTestPKI(t)
	renewed := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "renewed"}}, p.ca)
	dir := t.TempDir()
	writeSecret(t, dir, "1", p.server.key, p.server.cert)
	files, material, err := newFilesSource(tlsFiles{Key: filepath.Join(dir, "tls.key"), Chain: filepath.Join(dir, "tls.crt")})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := newServerTLS(material, false)
	if err != nil {
		t.Fatal(err)
	}
	src := newTLSSource(cfg, false)
	src.refresh = files.refresh
	serving := func() string {
		files.lastCheck = time.Time{} // as if the interval had passed
		return leafName(src.forHandshake())
	}
	if got := serving(); got != "localhost" {
		t.Fatalf("serving %q, want localhost", got)
	}
	writeSecret(t, dir, "2", renewed.key, renewed.cert)
	if got := serving(); got != "renewed" {
		t.Errorf("after the swap: serving %q, want renewed", got)
	}
	writeSecret(t, dir, "3", p.server.key, renewed.cert)
	if got := serving(); got != "renewed" {
		t.Errorf("after a mismatched swap: serving %q, want renewed", got)
	}
	// Checked at most once per interval: a change right after a check
	// waits for the next.
	files.lastCheck = time.Now()
	writeSecret(t, dir, "4", p.server.key, p.server.cert)
	if got := leafName(src.forHandshake()); got != "renewed" {
		t.Errorf("within the interval: serving %q, want renewed", got)
	}
	if got := serving(); got != "localhost" {
		t.Errorf("after the interval: serving %q, want localhost", got)
	}
}

// Concurrent handshakes on a fetching source: each asks once, one at a
// time, and every handshake gets the configuration fetched.
func TestConcurrentHandshakesShareFetches(t *testing.T) {
	p := newTestPKI(t)
	renewed := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "renewed"}}, p.ca)
	sec, err := ParseTLS([]byte(tlsDoc(p.server.key, p.server.cert, nil, false)))
	if err != nil {
		t.Fatal(err)
	}
	sec.source.refresh = fetchRefresh(11)
	done := make(chan struct{})
	answered := make(chan int)
	go func() {
		n := 0
		defer func() { answered <- n }()
		for {
			select {
			case <-done:
				return
			default:
			}
			if id, _, ok := NextFetch(20 * time.Millisecond); ok {
				n++
				FetchDone(id, materialDoc(renewed.key, renewed.cert))
			}
		}
	}()
	const handshakes = 16
	names := make(chan string, handshakes)
	for range handshakes {
		go func() { names <- leafName(sec.source.forHandshake()) }()
	}
	for range handshakes {
		if got := <-names; got != "renewed" {
			t.Errorf("a handshake served %q, want renewed", got)
		}
	}
	close(done)
	if n := <-answered; n != handshakes {
		t.Errorf("%d fetches answered, want one per handshake (%d)", n, handshakes)
	}
}

func TestSessionTicketKeysRenewAndRotate(t *testing.T) {
	var tickets sessionTickets
	cfg := &tls.Config{}
	tickets.renew(cfg)
	first := tickets.keys[0]
	tickets.rotate(cfg) // not a day old: unchanged
	if len(tickets.keys) != 1 {
		t.Fatalf("rotated early: %d keys", len(tickets.keys))
	}
	for day := 1; day <= 10; day++ {
		tickets.created = tickets.created.Add(-ticketKeyRotation)
		tickets.rotate(cfg)
	}
	if n := len(tickets.keys); n != int(ticketKeyLifetime/ticketKeyRotation) {
		t.Errorf("after ten days: %d keys, want a week's", n)
	}
	for _, k := range tickets.keys {
		if k == first {
			t.Error("a key older than a week is still accepted")
		}
	}
	tickets.renew(cfg)
	if len(tickets.keys) != 1 {
		t.Errorf("new key material kept %d old keys", len(tickets.keys)-1)
	}
}
