"""Idle notices: mail the people who held idle GPUs what they held, and remember it.

`episodes` reads the day's waste episodes from the marts, `plan` decides who is mailed
what, `messages` composes the emails, `sent_log` remembers what was sent, and `idle` runs
`gpufleet notify idle` from them.
"""
