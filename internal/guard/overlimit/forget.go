package overlimit

// Forget drops the denial held for key, if any, so that the next op on it
// goes to the store: for a key whose state was reset there.
func (c *Cache) Forget(key string) { c.forget(key) }
