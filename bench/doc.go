// Package bench is seckill's measuring instrument: a keep-alive HTTP load generator (closed loop
// at a concurrency, or open loop at a rate with latency measured from each request's scheduled
// send time, so coordinated omission cannot hide the tail), the scenarios of `seckill bench`
// against the production topology (api, consumer and compensator as separate processes on real
// Redis, PostgreSQL and Kafka), the baselines they are compared with in the same run, and the
// report: a summary table, a JSON result and a self-contained HTML page in bench/results.
//
// The numbers are only meaningful as ratios taken in one run on one machine: every scenario and
// every baseline shares the same cores with the same services and the same load generator.
package bench
