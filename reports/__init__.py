"""The weekly report: Altair charts and Jinja templates over the warehouse marts (read-only)."""
