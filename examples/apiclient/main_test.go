package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunWritesPlots(t *testing.T) {
	dir := t.TempDir()
	stdout := os.Stdout
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	os.Stdout = devnull
	err = run(dir, 1, 4)
	os.Stdout = stdout
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.svg"))
	if len(files) != 2 {
		t.Fatalf("wrote %v; want two SVG files", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(strings.NewReader(string(b)))
		polylines := 0
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s is not well-formed XML: %v", f, err)
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
				polylines++
			}
		}
		if polylines != 5 { // the limit and one line per client
			t.Errorf("%s has %d polylines; want 5", f, polylines)
		}
	}
}

func TestRunRejectsBadClients(t *testing.T) {
	if err := run(t.TempDir(), 1, 0); err == nil {
		t.Fatal("run with 0 clients succeeded; want an error")
	}
}
