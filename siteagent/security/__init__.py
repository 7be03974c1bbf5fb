"""The site's side of trust: TLS, the authorized clients, request authentication with replay
protection, and what each refusal is answered with.
"""
