(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("matrix-data").textContent);
  var shim = document.getElementById("filter-shim");
  var status = document.getElementById("filter-status");
  var count = document.getElementById("filter-count");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#matrix tr.probe-row"));
  var groups = Array.prototype.slice.call(document.querySelectorAll("#matrix tr.group-row"));
  function applyFilters() {
    var shown = 0, shownGroups = {};
    rows.forEach(function (tr) {
      var okShim = shim.value === "all" || tr.getAttribute("data-shim") === shim.value;
      var okStatus = status.value === "all" || tr.getAttribute("data-statuses").split(" ").indexOf(status.value) >= 0;
      tr.hidden = !(okShim && okStatus);
      if (!tr.hidden) { shown += 1; shownGroups[tr.getAttribute("data-shim")] = true; }
    });
    groups.forEach(function (tr) { tr.hidden = !shownGroups[tr.getAttribute("data-shim")]; });
    count.textContent = shown + " of " + rows.length + " probes shown";
  }
  if (shim && status) {
    shim.addEventListener("change", applyFilters);
    status.addEventListener("change", applyFilters);
  }
  var byKey = {};
  data.runs.forEach(function (run) { byKey[run.key] = run; });
  var selA = document.getElementById("diff-a");
  var selB = document.getElementById("diff-b");
  var out = document.getElementById("diff-result");
  var working = ["pass", "pass_cpu_fallback", "fake"];
  var broken = ["fail", "harness_error", "partial"];
  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined) { node.textContent = text; }
    if (cls) { node.className = cls; }
    return node;
  }
  function label(s) { return data.symbols[s] + " " + data.labels[s]; }
  function renderDiff() {
    var a = byKey[selA.value], b = byKey[selB.value];
    out.textContent = "";
    if (!a || !b) { out.appendChild(el("p", "Pick two runs.")); return; }
    if (a.device !== b.device) {
      out.appendChild(el("p", "These runs are of different devices (" + a.device + " / " + b.device +
        "): pick two runs of the same device."));
      return;
    }
    out.appendChild(el("p", a.device + ": " + a.date + " (" + a.source + ") \u2192 " + b.date + " (" + b.source + ")"));
    var probes = {};
    Object.keys(a.statuses).forEach(function (p) { probes[p] = true; });
    Object.keys(b.statuses).forEach(function (p) { probes[p] = true; });
    var groups = {broken: [], fixed: [], changed: []};
    Object.keys(probes).sort().forEach(function (p) {
      var x = a.statuses[p] || "untested", y = b.statuses[p] || "untested";
      if (x === y) { return; }
      var kind = working.indexOf(x) >= 0 && broken.indexOf(y) >= 0 ? "broken"
        : (broken.indexOf(x) >= 0 && working.indexOf(y) >= 0 ? "fixed" : "changed");
      groups[kind].push([p, x, y]);
    });
    [["Newly broken", "broken"], ["Newly working", "fixed"], ["Other changes", "changed"]].forEach(function (g) {
      var items = groups[g[1]];
      out.appendChild(el("h3", g[0] + " (" + items.length + ")", g[1]));
      if (!items.length) { out.appendChild(el("p", "none")); return; }
      var ul = el("ul");
      items.forEach(function (c) {
        var li = el("li");
        li.appendChild(el("code", c[0]));
        li.appendChild(document.createTextNode(": " + label(c[1]) + " \u2192 " + label(c[2])));
        ul.appendChild(li);
      });
      out.appendChild(ul);
    });
  }
  if (selA && selB) {
    if (selA.getAttribute("data-default")) { selA.value = selA.getAttribute("data-default"); }
    if (selB.getAttribute("data-default")) { selB.value = selB.getAttribute("data-default"); }
    selA.addEventListener("change", renderDiff);
    selB.addEventListener("change", renderDiff);
  }
})();
