"""The market's use cases on one site: quoting, the reservation lifecycle (accept, expire,
reconcile), deals (confirm with receipt, cancel with refund), what is owed to the ledger, and the
SQLite store they remember in. The API, the command line and the metrics call these; none of
them re-implements one.
"""
