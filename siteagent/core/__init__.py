"""The pure core: value types, the availability profile, the scheduling engines and the plan,
advertised slots and queue waits. It imports nothing of siteagent outside itself: no backend,
store, pricing, API or command line.
"""
