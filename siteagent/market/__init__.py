"""The market's use cases on one site: quoting, the reservation lifecycle (accept, expire,
reconcile, the batch system's notices), deals (confirm with receipt, cancel with refund), what is
owed to the ledger, the jobs that ran in each reservation, and the SQLite store they remember in.
The API, the command line and the metrics call these; none of them re-implements one.
"""
