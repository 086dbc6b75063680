package host

// ConfigIdentity is the config identity that the slots of typ report, for the external
// tests.
func (h *Host) ConfigIdentity(typ string) string { return h.byType[typ].configID }
