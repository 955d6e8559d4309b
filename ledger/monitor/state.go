package monitor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// StateType names the state file's format.
const StateType = "chio.monitor_state.v1"

// State is what a monitor remembers between checks and across restarts:
// the last checkpoint it verified. Every later checkpoint must extend it.
type State struct {
	Type   string `json:"type"`
	Origin string `json:"origin"`
	Size   uint64 `json:"size"`
	Root   string `json:"root"` // 0x and 64 lowercase hex, as schemas.EncodeHash
	// Checkpoint is the signed note as the log served it: with a later
	// conflicting checkpoint, the evidence of a fork.
	Checkpoint string `json:"checkpoint"`
	// FirstSeen is when this monitor first saw this size and root. A
	// checkpoint note carries no time, so the age metric counts from here.
	FirstSeen time.Time `json:"first_seen"`
}

func (s *State) root() ([]byte, error) { return schemas.ParseHash(s.Root) }

// LoadState reads a state file; a missing file is no state (a first run)
// and no error.
func LoadState(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load monitor state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("load monitor state %s: %w", path, err)
	}
	if s.Type != StateType {
		return nil, fmt.Errorf("load monitor state %s: type %q, want %q", path, s.Type, StateType)
	}
	if _, err := s.root(); err != nil {
		return nil, fmt.Errorf("load monitor state %s: root: %w", path, err)
	}
	if s.Origin == "" {
		return nil, fmt.Errorf("load monitor state %s: no origin", path)
	}
	return &s, nil
}

// SaveState writes s to path atomically: a crash leaves the old file or
// the new one, never a torn one.
func SaveState(path string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("save monitor state: %w", err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("save monitor state: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("save monitor state: %w", err)
	}
	// The rename is durable once the directory is synced.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
