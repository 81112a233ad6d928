package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestHeaderDeclaresEveryExport keeps pgn.h the one place the C API is
// described: each //export has its declaration (and contract) there, and
// pgn.h declares nothing Go doesn't export. That the declarations agree with
// Go's signatures the build itself checks: cgo's generated header declares
// every export again next to pgn.h's, and C rejects conflicting types.
func TestHeaderDeclaresEveryExport(t *testing.T) {
	header, err := os.ReadFile("pgn.h")
	if err != nil {
		t.Fatal(err)
	}
	declared := names(regexp.MustCompile(`(?m)^(?:int|void) (pgn_\w+)\(`), string(header))

	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	for _, s := range sources {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	exported := names(regexp.MustCompile(`(?m)^//export (\w+)$`), code.String())

	if len(exported) == 0 || !slices.Equal(declared, exported) {
		t.Fatalf("pgn.h declares %v\nthe Go sources export %v", declared, exported)
	}
}

// names returns the sorted first submatches of re in s.
func names(re *regexp.Regexp, s string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return out
}
