"""The results format, read in one place: the files `ab`, `profile-compile`, `run --report` and
`campaign` write, parsed into typed records for every command that reads them (`ab report`,
`compare`, `campaign report`). docs/architecture/results-format.md describes each file field by
field; the version every file carries is ``compile_ahead.output.format_version``.

experiment     an `ab` results directory's experiment.json, checked enough to analyse it
records        trials.jsonl: one trial record a line (TrialRecord), cut-off lines skipped
record_values  a trial record's numbers checked where it is read (log line, store row)
profile        a profile-compile directory: its file names and its report.json
campaign       a campaign store's meta (CampaignMeta) and trial rows, a `campaign report`'s
               campaign.json
"""
