"""Pricing policies: what a reservation costs, by load and by the delay it imposes."""
