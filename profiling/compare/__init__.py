"""`compile-ahead compare`: every A/B and profile as one self-contained web page.

model / profile_page  the page's data, gathered from the trial analysis objects (and a
                      profile-compile report), never from the markdown; what is flagged is
                      the trials' judgement (trials.power), shown as it is
summary               the flagged changes per comparison: count, mean, largest
experiment_page       an `ab` experiment's sections (summary, design, endpoints, passes, trials)
campaign              a campaign's page from plain data: design, cross-cell table, forest
                      plots, release histories, pass moves, cell sections
                      (campaigns/results/page.py feeds it)
html / svg / assets   tables, filters, inline SVG plots, the inlined stylesheet and script
sources               which directories have a page, and how it is built
page_server           `--open`: the page on 127.0.0.1, trace links through `trace open`
"""
