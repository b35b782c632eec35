"""What a campaign file must pass before anything is written: its arms (arms), the identity of
what defines them (identity), its size (limits) and its text, options and report tables
(spec_text)."""
