"""The simulated backend: a roofline cost model, runners that compute nothing and advance a virtual clock
by the model's step time, and the KV link they move bytes over; the real schedulers run on top."""
