"""The page's stylesheet and script, inlined into every page (it opens from file:// with no
network: no CDN, no web font; the system's fonts)."""

from __future__ import annotations

CSS = """
:root { --fg: #1b1f24; --muted: #5b6470; --line: #d7dbe0; --bg-soft: #f4f6f8;
  --bad: #c62828; --good: #2e7d32; --changed: #6a1b9a; --warn: #8a5a00; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  margin: 0; padding: 12px 20px 40px; }
h1 { font-size: 20px; margin: 8px 0 4px; } h2 { font-size: 17px; margin: 26px 0 8px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
code, pre { font: 12.5px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
pre { background: var(--bg-soft); padding: 8px 10px; overflow-x: auto; white-space: pre-wrap;
  word-break: break-all; margin: 4px 0; }
.muted, .note { color: var(--muted); } .note { font-size: 12.5px; }
.banner { border-left: 4px solid var(--warn); background: #fff8e6; padding: 6px 10px;
  margin: 8px 0; }
.banner.error { border-color: var(--bad); background: #fdecea; }
table { border-collapse: collapse; margin: 4px 0 8px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: left;
  vertical-align: middle; }
th { background: var(--bg-soft); position: sticky; top: 0; z-index: 1; }
table.sortable th { cursor: pointer; user-select: none; white-space: nowrap; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
td.status { white-space: nowrap; }
td.status.unavailable { white-space: normal; min-width: 16em; color: var(--muted); }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.regression td.status, span.regression { color: var(--bad); font-weight: 600; }
tr.improvement td.status, span.improvement { color: var(--good); font-weight: 600; }
tr.changed td.status, span.changed { color: var(--changed); font-weight: 600; }
.filters { display: flex; gap: 14px; align-items: center; margin: 6px 0; }
.filters input[type=search] { width: 260px; padding: 3px 6px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 4px 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
details > summary, tr[data-cell] { cursor: pointer; }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
svg .tick { fill: var(--muted); font-size: 10px; }
svg .zero { stroke: #888; stroke-width: 1; } svg .axis { stroke: #999; }
svg .grid { stroke: #eee; } svg .band { fill: #e8eaed; }
svg.strip .dot { fill: #555; } svg.strip .ci { stroke: #3d6fb6; stroke-width: 3; opacity: .55; }
svg.strip.regression .ci, svg .ci.regression { stroke: var(--bad); opacity: .8; }
svg.strip.improvement .ci, svg .ci.improvement { stroke: var(--good); opacity: .8; }
svg .ci { stroke: #3d6fb6; stroke-width: 2; }
svg.forest .dot { fill: #3d6fb6; }
svg .dot.regression { fill: var(--bad); }
svg .dot.improvement { fill: var(--good); }
svg .series { fill: none; stroke-width: 1.6; } svg circle.series { stroke: none; }
svg .whisker { stroke-width: 1; }
""" + "".join(
    f"svg .s{i} {{ stroke: {c}; }} svg circle.s{i} {{ fill: {c}; }}\n"
    for i, c in enumerate(
        ("#3d6fb6", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#5d4037", "#ad1457")
    )
)

# Sorting (first click on a numeric column: largest first), filtering by name and by "flagged
# only", trace links that need the local server, and sections opened by the address's #anchor.
JS = """
(function () {
  "use strict";
  function key(cell, numeric) {
    var v = cell.getAttribute("data-v");
    if (v === null) v = cell.textContent.trim();
    if (!numeric) return v.toLowerCase();
    return v === "" ? null : Number(v);
  }
  function sortBy(table, th) {
    var heads = Array.prototype.slice.call(th.parentNode.children);
    var col = heads.indexOf(th);
    var numeric = th.getAttribute("data-type") === "num";
    var first = numeric ? "descending" : "ascending";
    var dir = th.getAttribute("aria-sort") === first
      ? (first === "descending" ? "ascending" : "descending") : first;
    heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
    var sign = dir === "descending" ? -1 : 1;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col], numeric), y = key(b.cells[col], numeric);
      if (x === null || y === null) return (x === null) - (y === null);
      return x < y ? -sign : x > y ? sign : 0;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.tHead.querySelectorAll("th").forEach(function (th) {
      th.addEventListener("click", function () { sortBy(table, th); });
    });
  });
  document.querySelectorAll(".filters").forEach(function (box) {
    var table = document.getElementById(box.getAttribute("data-for"));
    var name = box.querySelector("input[type=search]");
    var flagged = box.querySelector("input[type=checkbox]");
    var shown = box.querySelector(".shown");
    function apply() {
      var q = name.value.trim().toLowerCase(), count = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
        var ok = r.getAttribute("data-name").indexOf(q) >= 0 &&
          (!flagged || !flagged.checked || r.getAttribute("data-flagged") === "1");
        r.hidden = !ok;
        if (ok) count += 1;
      });
      shown.textContent = String(count);
    }
    name.addEventListener("input", apply);
    if (flagged) flagged.addEventListener("change", apply);
    apply();
  });
  var served = location.protocol === "http:" || location.protocol === "https:";
  document.body.classList.add(served ? "served" : "not-served");
  document.querySelectorAll(".server-hint").forEach(function (e) { e.hidden = served; });
  if (!served) {
    document.querySelectorAll("a.trace").forEach(function (a) {
      a.addEventListener("click", function (e) {
        e.preventDefault();
        var hint = document.getElementById("server-hint");
        if (hint) { hint.hidden = false; hint.scrollIntoView(); }
      });
    });
  }
  // the section the address's #anchor names; a malformed one (e.g. "#%") names none
  function anchorId() {
    try { return decodeURIComponent(location.hash.slice(1)); } catch (e) { return ""; }
  }
  function openAnchor() {
    var id = anchorId();
    var node = id && document.getElementById(id);
    while (node) {
      if (node.tagName === "DETAILS") node.open = true;
      node = node.parentElement;
    }
  }
  window.addEventListener("hashchange", openAnchor);
  openAnchor();
  // a campaign's row opens its cell's section; a link to the section already in the address
  // opens it again (no hashchange then)
  function go(id) {
    if (location.hash !== "#" + id) { location.hash = id; return; }
    openAnchor();
    var node = document.getElementById(id);
    if (node) node.scrollIntoView();
  }
  document.querySelectorAll("tr[data-cell]").forEach(function (row) {
    row.addEventListener("click", function (e) {
      if (!e.target.closest("a")) go(row.getAttribute("data-cell"));
    });
  });
  document.querySelectorAll('a[href^="#"]').forEach(function (a) {
    a.addEventListener("click", function (e) {
      if (a.getAttribute("href") !== location.hash) return;
      e.preventDefault();
      go(location.hash.slice(1));
    });
  });
})();
"""
