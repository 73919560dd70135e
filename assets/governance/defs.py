"""Governance's Definitions, assembled from one module per concern: deletion (requests, propagation, standing
rules: `deletion_defs`), policy proposals (propose, review, apply, verify: `proposal_defs`) and funnel reports
(`report_defs`). See README.md."""

import dagster as dg

from assets.governance import deletion_defs, proposal_defs, report_defs

defs = dg.Definitions.merge(deletion_defs.defs, proposal_defs.defs, report_defs.defs)
