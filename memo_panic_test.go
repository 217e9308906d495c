package pace_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/memory"
)

// inChild reports whether this test binary was started by runInChild, and
// otherwise runs the named test in a child process and fails unless it
// passes: a test whose failure on the old code is a crash of the whole
// process, not a failed assertion.
func inChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv("PACE_TEST_CHILD") == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), "PACE_TEST_CHILD="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a child process: %v\n%s", t.Name(), err, out)
	}
	return false
}

type loaderPanic struct{ n int }

// TestMemoLoaderPanicReachesCallers: the flight that runs a loader runs on a
// goroutine of singleflight's, which re-panicked there when the loader
// panicked, so the process crashed even though every caller recovered. The
// panic must reach each caller waiting on the load, with its own value, and
// the memo must work afterwards.
func TestMemoLoaderPanicReachesCallers(t *testing.T) {
	if !inChild(t) {
		return
	}
	m := newMemo(t, memory.New(), time.Hour)
	const n = 8
	release := make(chan struct{})
	load := func(context.Context) ([]byte, error) {
		<-release
		panic(loaderPanic{42})
	}
	var wg sync.WaitGroup
	got := make([]any, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { got[i] = recover() }()
			_, _ = m.Get(context.Background(), "k", load)
		}()
	}
	close(release)
	wg.Wait()
	for i, v := range got {
		if v != (loaderPanic{42}) {
			t.Errorf("caller %d recovered %v; want the loader's panic value %v", i, v, loaderPanic{42})
		}
	}
	v, err := m.Get(context.Background(), "k", func(context.Context) ([]byte, error) { return []byte("v"), nil })
	if string(v) != "v" || err != nil {
		t.Fatalf("Get after a load panicked = %q, %v; want \"v\", nil", v, err)
	}
}

// TestMemoLoaderGoexitIsAnError: a loader that ends its goroutine with
// runtime.Goexit (t.FailNow in a test's loader, say) left every caller
// waiting forever, since singleflight then sends no result. They must get
// an error instead.
func TestMemoLoaderGoexitIsAnError(t *testing.T) {
	m := newMemo(t, memory.New(), time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := m.Get(ctx, "k", func(context.Context) ([]byte, error) {
		runtime.Goexit()
		return nil, nil
	})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with a loader that calls runtime.Goexit = %q, %v; want an error at once", v, err)
	}
	v, err = m.Get(ctx, "k", func(context.Context) ([]byte, error) { return []byte("v"), nil })
	if string(v) != "v" || err != nil {
		t.Fatalf("Get after a load exited = %q, %v; want \"v\", nil", v, err)
	}
}
