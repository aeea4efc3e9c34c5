"""Decisions without I/O that several services share: domain bucketing and tenant sites
(:mod:`.domains`), client regular expressions on RE2 (:mod:`.patterns`), which budget holds
(:mod:`.budgets`) and the operator's proxy pools (:mod:`.proxy_pools`)."""
