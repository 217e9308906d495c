package memory_test

import (
	"testing"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/memory"
	"github.com/ratepace/pace/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) pace.Store { return memory.New() })
	storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore { return memory.New() })
}
