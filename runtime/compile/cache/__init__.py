"""The compile cache (store.py says how it works).

keys          what an entry's key is made of, and the graph identities callers name
entry_format  an entry's bytes (blob, trailer, footer) and the check before an import
outcome       what the cache did for a graph (hit, miss, off) and a compiled graph
store         CompileCache: lookup, import, store, prune; cached_compile, the one way through
dirs          the cache's directories and files, opened so no other user can plant one
entry_writes  the entries this process is writing, until a run ends
"""
