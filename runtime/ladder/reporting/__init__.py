"""What a ladder run tells as it happens and reports at its end.

events      what a run tells an observer (a trace writer, a progress bar) as it happens
accounting  time and memory accounting of a run, as an observer of its events
progress    a progress bar for ladder runs, as an observer of its events
report      what a run reports: typed records, their JSON form, one summary formatter
batch       the summary lines of a batch: each sequence, the aggregate rate, KV per sequence
"""
