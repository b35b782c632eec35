"""What a campaign is, before anything runs or is written.

spec          the campaign file (TOML): kind, axes, arms, pairs; validated whole; expands to
              cells, each an `ab KIND` command line
validation    what a campaign file must pass first: its arms, their identity, its size, its text
environments  a release's own environment, built once per machine with uv in the user cache
"""
