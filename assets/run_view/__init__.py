"""Run views: a frozen selection of tokenized documents (mixture, seed, epoch policy, packing, pinned input
snapshots), checked, and published only by a reviewer's decision (the publish_run_view job)."""
