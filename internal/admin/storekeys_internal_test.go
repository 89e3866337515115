package admin

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

// TestStoreKeysCalendar: explain names a calendar's windows by their starts
// in its zone: a Europe/Berlin month's sliding window at 2027-03-10 reads
// March's counter (from 2027-02-28 23:00 UTC) and February's (from
// 2027-01-31 23:00 UTC).
func TestStoreKeysCalendar(t *testing.T) {
	set, err := descriptors.NewSet([]descriptors.DomainConfig{{Name: "d", Descriptors: []descriptors.Descriptor{{Key: "k",
		Limit: &descriptors.Limit{Unit: descriptors.Month, RequestsPerUnit: 5, Algorithm: descriptors.SlidingWindow, Calendar: "Europe/Berlin"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2027, 3, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	march, feb := time.Date(2027, 2, 28, 23, 0, 0, 0, time.UTC).Unix(), time.Date(2027, 1, 31, 23, 0, 0, 0, time.UTC).Unix()
	got := storeKeys("b:", set.Limits()[0], now)
	if want := []string{"b:" + strconv.FormatInt(march, 10), "b:" + strconv.FormatInt(feb, 10)}; !slices.Equal(got, want) {
		t.Errorf("storeKeys = %q, want %q", got, want)
	}
}
