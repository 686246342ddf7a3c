// tlog-verify checks Sigil's transparency log checkpoints and proofs with the Go project's own
// implementations of the formats, golang.org/x/mod/sumdb/note (C2SP signed notes, Ed25519) and
// golang.org/x/mod/sumdb/tlog (RFC 9162 / RFC 6962 proofs): code nobody at Sigil wrote.
// test/transparency-interop.test.ts builds it against Debian's golang-golang-x-mod-dev (GOPATH mode,
// no module download) and feeds it, on standard input, what Sigil's queries answered:
//
//	{"verifierKey": "...", "checkpoints": ["<signed note>", ...],
//	 "inclusions": [{"checkpoint": 0, "index": 3, "entry": "<entry text>", "proof": ["<base64>", ...]}],
//	 "consistencies": [{"from": 0, "to": 1, "proof": ["<base64>", ...]}]}
//
// It prints one verdict per item, {"ok": true} or {"ok": false, "error": "..."}, as JSON.
package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type input struct {
	VerifierKey string   `json:"verifierKey"`
	Checkpoints []string `json:"checkpoints"`
	Inclusions  []struct {
		Checkpoint int      `json:"checkpoint"`
		Index      int64    `json:"index"`
		Entry      string   `json:"entry"`
		Proof      []string `json:"proof"`
	} `json:"inclusions"`
	Consistencies []struct {
		From  int      `json:"from"`
		To    int      `json:"to"`
		Proof []string `json:"proof"`
	} `json:"consistencies"`
}

type verdict struct {
	Ok     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	Origin string `json:"origin,omitempty"`
	Size   int64  `json:"size,omitempty"`
}

type checkpoint struct {
	origin string
	size   int64
	root   tlog.Hash
}

// parseCheckpoint reads a C2SP tlog-checkpoint body: origin, size, base64 root hash, one a line.
func parseCheckpoint(text string) (checkpoint, error) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 {
		return checkpoint{}, errors.New("checkpoint has fewer than three lines")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 {
		return checkpoint{}, errors.New("malformed tree size")
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		return checkpoint{}, err
	}
	return checkpoint{origin: lines[0], size: size, root: root}, nil
}

func hashes(encoded []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(encoded))
	for i, e := range encoded {
		b, err := base64.StdEncoding.DecodeString(e)
		if err != nil || len(b) != tlog.HashSize {
			return nil, fmt.Errorf("proof hash %d is not a base64 SHA-256", i)
		}
		copy(out[i][:], b)
	}
	return out, nil
}

func fail(err error) verdict { return verdict{Ok: false, Error: err.Error()} }

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "reading input:", err)
		os.Exit(2)
	}
	verifier, err := note.NewVerifier(in.VerifierKey)
	if err != nil {
		fmt.Fprintln(os.Stderr, "verifier key:", err)
		os.Exit(2)
	}
	verifiers := note.VerifierList(verifier)
	opened := make([]*checkpoint, len(in.Checkpoints))
	out := struct {
		Checkpoints   []verdict `json:"checkpoints"`
		Inclusions    []verdict `json:"inclusions"`
		Consistencies []verdict `json:"consistencies"`
	}{[]verdict{}, []verdict{}, []verdict{}}
	for i, text := range in.Checkpoints {
		n, err := note.Open([]byte(text), verifiers)
		if err != nil {
			out.Checkpoints = append(out.Checkpoints, fail(err))
			continue
		}
		c, err := parseCheckpoint(n.Text)
		if err != nil {
			out.Checkpoints = append(out.Checkpoints, fail(err))
			continue
		}
		opened[i] = &c
		out.Checkpoints = append(out.Checkpoints, verdict{Ok: true, Origin: c.origin, Size: c.size})
	}
	for _, inc := range in.Inclusions {
		c := opened[inc.Checkpoint]
		if c == nil {
			out.Inclusions = append(out.Inclusions, fail(errors.New("its checkpoint did not open")))
			continue
		}
		proof, err := hashes(inc.Proof)
		if err != nil {
			out.Inclusions = append(out.Inclusions, fail(err))
			continue
		}
		leaf := tlog.RecordHash([]byte(inc.Entry))
		if err := tlog.CheckRecord(tlog.RecordProof(proof), c.size, c.root, inc.Index, leaf); err != nil {
			out.Inclusions = append(out.Inclusions, fail(err))
			continue
		}
		out.Inclusions = append(out.Inclusions, verdict{Ok: true})
	}
	for _, con := range in.Consistencies {
		from, to := opened[con.From], opened[con.To]
		if from == nil || to == nil {
			out.Consistencies = append(out.Consistencies, fail(errors.New("a checkpoint did not open")))
			continue
		}
		proof, err := hashes(con.Proof)
		if err != nil {
			out.Consistencies = append(out.Consistencies, fail(err))
			continue
		}
		if err := tlog.CheckTree(tlog.TreeProof(proof), to.size, to.root, from.size, from.root); err != nil {
			out.Consistencies = append(out.Consistencies, fail(err))
			continue
		}
		out.Consistencies = append(out.Consistencies, verdict{Ok: true})
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(2)
	}
}
