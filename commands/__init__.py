"""The commands: every console script's parser and entry point, above the library packages
(the package root's bottom layer, runtime/, profiling/), which import nothing from here.

``main`` is the `compile-ahead` dispatcher and ``profile_compile`` the `profile-compile`
command; ``running`` is how every command runs; ``options`` the flags several commands share
and the run configuration they give (runtime/ladder/settings/config.py).
"""
