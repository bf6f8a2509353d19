// Package fakekit is the machinery the in-process platform fakes (telegramtest, feishutest,
// slacktest) share: the listener and what Close ends ([Lifecycle]), a replaceable clock
// ([Clock]), the log of calls ([Calls]), injected error answers and held answers ([Faults],
// [Hangs]) and retry-after windows per rate-limit key ([Windows]).
//
// It holds no platform's semantics: how a call is keyed, what an injected fault answers and
// which calls count as early stay in each fake. Apart from [Lifecycle] and [Clock], its types
// are not safe for concurrent use: the fake guards them with its own lock, so that a call's
// record, its faults and its rate limits change together.
package fakekit
