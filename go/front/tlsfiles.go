package front

import (
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"
)

// TLS key material read from files, and read again when they change
// (pygrpc_native.ssl_server_credentials_from_files). Kubernetes updates a
// mounted secret by pointing a symlinked directory (..data) at a new
// directory, so the files are followed through their symlinks: a change of
// the resolved path, size or modification time of any of them is an
// update. Files are checked at most once per filesCheckInterval, by a new
// handshake (no goroutine, no inotify: the same on every platform).
//
// The key and chain are taken together and only when they match: an
// update in which they don't (one written before the other, or a wrong
// pair) is logged and the current configuration stays until the files
// change again.

const filesCheckInterval = time.Second

// tlsFiles are the paths of the "files" member of the "tls" JSON.
type tlsFiles struct {
	Key   string `json:"key"`
	Chain string `json:"chain"`
	Roots string `json:"roots"` // "": no root certificates
}

type filesSource struct {
	files     tlsFiles
	lastCheck time.Time
	stamp     string // what the files were when last read (filesStamp)
}

func newFilesSource(f tlsFiles) (*filesSource, tlsMaterial, error) {
	if f.Key == "" || f.Chain == "" {
		return nil, tlsMaterial{}, configErrorf("rotating credentials need the paths of a private key and a certificate chain")
	}
	s := &filesSource{files: f, lastCheck: time.Now()}
	stamp, err := s.filesStamp()
	if err != nil {
		return nil, tlsMaterial{}, configErrorf("%v", err)
	}
	m, err := s.read()
	if err != nil {
		return nil, tlsMaterial{}, configErrorf("%v", err)
	}
	s.stamp = stamp
	return s, m, nil
}

func (s *filesSource) paths() []string {
	p := []string{s.files.Key, s.files.Chain}
	if s.files.Roots != "" {
		p = append(p, s.files.Roots)
	}
	return p
}

// filesStamp describes the files as they are now: resolved path, size and
// modification time of each.
func (s *filesSource) filesStamp() (string, error) {
	stamp := ""
	for _, p := range s.paths() {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return "", fmt.Errorf("cannot read %s: %v", p, err)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return "", fmt.Errorf("cannot read %s: %v", p, err)
		}
		stamp += fmt.Sprintf("%s\x00%d\x00%d\x00", real, fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp, nil
}

func (s *filesSource) read() (tlsMaterial, error) {
	key, err := readPEMFile(s.files.Key, "the private key")
	if err != nil {
		return tlsMaterial{}, err
	}
	chain, err := readPEMFile(s.files.Chain, "the certificate chain")
	if err != nil {
		return tlsMaterial{}, err
	}
	m := tlsMaterial{Pairs: [][2][]byte{{key, chain}}}
	if s.files.Roots != "" {
		roots, err := readPEMFile(s.files.Roots, "the root certificates")
		if err != nil {
			return tlsMaterial{}, err
		}
		m.Roots = &roots
	}
	return m, nil
}

// maxPEMFile bounds what a credentials file may hold: PEM chains are a few
// KiB, and a path to a device or a huge file must not take the process.
const maxPEMFile = 1 << 20

// readPEMFile reads a regular file of at most maxPEMFile bytes.
func readPEMFile(path, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", what, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", what, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxPEMFile {
		return nil, fmt.Errorf("cannot read %s: %s is not a regular file of at most %d bytes", what, path, maxPEMFile)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPEMFile+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", what, err)
	}
	if len(data) > maxPEMFile {
		return nil, fmt.Errorf("cannot read %s: %s holds more than %d bytes", what, path, maxPEMFile)
	}
	return data, nil
}

// refresh is the tlsSource's: new material when the files changed since
// they were last read, checked at most once per filesCheckInterval.
func (s *filesSource) refresh() *tlsMaterial {
	now := time.Now()
	if now.Sub(s.lastCheck) < filesCheckInterval {
		return nil
	}
	s.lastCheck = now
	stamp, err := s.filesStamp()
	if err != nil {
		if stamp != s.stamp {
			log.Printf("pygrpc_native: TLS credential files can't be read, the current credentials stay in use: %v", err)
		}
		s.stamp = stamp
		return nil
	}
	if stamp == s.stamp {
		return nil
	}
	s.stamp = stamp
	m, err := s.read()
	if err != nil {
		log.Printf("pygrpc_native: TLS credential files can't be read, the current credentials stay in use: %v", err)
		return nil
	}
	return &m
}
