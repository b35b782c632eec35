"""What a campaign reports.

analyses  the campaign analysed once: what the report and the page are both made of
report    `campaign report`: per cell the files `ab report` writes, across cells one table
plots     the forest and history PNGs
page      the campaign's compare page (`compile-ahead compare STORE`, compare.html)
history   compile campaigns over releases: compile wall per arm, passes that moved
"""
