"""The pure core: value types, the availability profile, the scheduling engines and the plan,
advertised slots, queue waits and what a reservation's jobs used; and what every layer above
shares about its inputs and its files: the name rules, how durations and times are written,
which file modes are trusted and kept private. It imports nothing of siteagent outside itself:
no backend, store, pricing, API or command line.
"""
