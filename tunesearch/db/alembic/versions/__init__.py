"""Schema revisions, one file each, with readable ids (v1_initial, v2_trials_history, ...)."""
