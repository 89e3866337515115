package limitertest

import (
	"fmt"
	"time"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// calendarTables are windows of a calendar's periods (limiter.Op.Calendar),
// in Europe/Berlin (CET, UTC+1; CEST, UTC+2 from 02:00 CET on the last
// Sunday of March to 03:00 CEST on the last Sunday of October), next
// year: a month resets at midnight on the 1st, whatever February's and a
// summer-time change's length; a day at midnight, 23 hours long on the
// day summer time starts, 25 on the day it ends. Instants are written in
// UTC, from those facts; keys carry the period's start, Unix seconds, and
// expire at its end (a sliding window's at the next period's).
func calendarTables() []table {
	y := time.Now().Year() + 1
	utc := func(m time.Month, d, h int) int64 { // an hour's start, from base
		return time.Date(y, m, d, h, 0, 0, 0, time.UTC).UnixMilli() - base // d 0: the month before's last day
	}
	suffix := func(at int64) string { return fmt.Sprint((base + at) / 1000) }
	feb := int64(28)
	if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
		feb = 29
	}
	lastSunday := func(m time.Month) int {
		d := 31
		for time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Weekday() != time.Sunday {
			d--
		}
		return d
	}
	berlin, err := descriptors.NewCalendar("Europe/Berlin", descriptors.Month, 1)
	days, err2 := descriptors.NewCalendar("Europe/Berlin", descriptors.Day, 1)
	if err != nil || err2 != nil {
		panic(fmt.Sprint("the Europe/Berlin calendar: ", err, err2))
	}
	// The 1st of each month at midnight, Berlin.
	janEnd := utc(time.January, 31, 23) // February 1st, CET
	febEnd := utc(time.February, int(feb), 23)
	marEnd := utc(time.March, 31, 22) // April 1st, CEST
	aprEnd := utc(time.April, 30, 22)
	month := func(alg descriptors.Algorithm, requests int64) limiter.Op {
		return limiter.Op{Algorithm: alg, Limit: requests * milli, Window: 30 * day, Calendar: berlin}
	}
	const march = 743 * hour // 31 days less the hour summer time skips
	// A sliding window weighs March in 1 s steps: wg = 2,674,800; April's
	// wg = 2,592,000. share(p, rem) = floor(p*rem/wg).
	sliding := month(descriptors.SlidingWindow, 10)
	spring, autumn := lastSunday(time.March), lastSunday(time.October)
	sundayMar := utc(time.March, spring-1, 23) // midnight CET
	mondayMar := utc(time.March, spring, 22)   // midnight CEST
	sundayOct := utc(time.October, autumn-1, 22)
	mondayOct := utc(time.October, autumn, 23)
	return []table{{
		name: "FixedMonth",
		op:   month(descriptors.FixedWindow, 3),
		steps: []step{
			{janEnd - 1, 3000, allow(0, 1)},
			{janEnd - 1, 1000, deny(0, 1, 1)},
			{janEnd, 1000, allow(2000, feb*day)},
			{febEnd - 1000, 0, allow(2000, 1000)},
			{febEnd, 1000, allow(2000, march)},
			{marEnd - hour, 0, allow(2000, hour)},
			{marEnd, 1000, allow(2000, 30*day)},
		},
		expiryAfter: janEnd - 1,
		expiries: map[string]int64{
			suffix(janEnd): febEnd, suffix(febEnd): marEnd, suffix(marEnd): aprEnd,
			suffix(utc(time.January, 0, 23)): janEnd, // January, from December 31st, 23:00 UTC
		},
	}, {
		name: "SlidingMonth",
		op:   sliding,
		steps: []step{
			{janEnd, 10000, allow(0, feb*day)},
			// March 1st: rem 2,674,799, share(10000, rem) = 9999.
			{febEnd, 0, allow(1, march)},
			// share <= 9000 for rem <= 2,407,587: elapsed 267,212 s.
			{febEnd, 1000, deny(1, 267_212_000, march)},
			{febEnd + 267_211_999, 1000, deny(999, 1, march-267_211_999)}, // share 9001
			{febEnd + 267_212_000, 1000, allow(0, march-267_212_000)},
			// An hour before April: rem 3,599, share 13, weighted 1013 +
			// 10000; cur 1000 slides in April (wg 2,592,000), share 0
			// for rem <= 2591: elapsed 2,589,408 s there.
			{marEnd - hour, 10000, deny(8987, hour+2_589_408_000, hour)},
		},
		expiryAfter: janEnd - 1,
		expiries:    map[string]int64{suffix(janEnd): marEnd, suffix(febEnd): aprEnd},
	}, {
		name: "DaysOfTwentyThreeAndTwentyFiveHours",
		op:   limiter.Op{Algorithm: descriptors.FixedWindow, Limit: milli, Window: day, Calendar: days},
		steps: []step{
			{sundayMar - 1, 1000, allow(0, 1)},
			{sundayMar, 1000, allow(0, 23*hour)},
			{mondayMar - 1, 1000, deny(0, 1, 1)},
			{mondayMar, 1000, allow(0, day)},
			{sundayOct, 1000, allow(0, 25*hour)},
			{mondayOct - 1, 0, allow(0, 1)},
			{mondayOct, 0, allow(1000, day)},
		},
		expiryAfter: mondayOct - 1,
		expiries:    map[string]int64{suffix(sundayOct): mondayOct},
	}}
}
