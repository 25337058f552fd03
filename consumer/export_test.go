package consumer

// Pace returns how many partitions of the requested topic the consumer owns and the most events
// a second it persists now: its share of MaxRate.
func (c *Consumer) Pace() (owned int, limit float64) {
	c.pace.mu.Lock()
	defer c.pace.mu.Unlock()
	return len(c.pace.owned), float64(c.pace.lim.Limit())
}
