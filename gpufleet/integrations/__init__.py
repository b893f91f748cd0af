"""Integrations with the systems a site already runs: each turns that system's answers into
the contract's files (sample files under raw/samples, allocation rows under raw/allocations),
so that nothing downstream knows where a row came from."""
