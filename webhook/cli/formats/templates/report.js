"use strict";
// Filters and sorting for the findings table: plain DOM, no framework, nothing loaded.
(function () {
  var table = document.getElementById("table");
  var form = document.getElementById("filters");
  var shown = document.getElementById("shown");
  if (!table || !form) return;
  var body = table.tBodies[0];
  var VERDICTS = ["error", "deny", "would-deny", "warn", "audit", "patch", "would-patch", "excepted"];
  // Each row once: its cells' text for the filters and the sort, its whole text for search.
  var rows = Array.prototype.map.call(body.rows, function (tr, index) {
    var cells = Array.prototype.map.call(tr.cells, function (td) { return td.textContent; });
    return { tr: tr, cells: cells, text: tr.textContent.toLowerCase(), index: index };
  });
  var selects = Array.prototype.slice.call(form.querySelectorAll("select"));
  var file = document.getElementById("f-file");
  var search = document.getElementById("f-text");
  var total = rows.length;

  function plural(n) { return n === 1 ? "finding" : "findings"; }

  function apply() {
    var wanted = selects.map(function (select) {
      var value = select.value;
      return { col: +select.dataset.col, value: value === "-" ? "" : value, any: value === "" };
    });
    var part = file.value.trim().toLowerCase();
    var words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    var count = 0;
    rows.forEach(function (row) {
      var keep = wanted.every(function (w) { return w.any || row.cells[w.col] === w.value; }) &&
        (!part || row.cells[7].toLowerCase().indexOf(part) >= 0) &&
        words.every(function (word) { return row.text.indexOf(word) >= 0; });
      row.tr.hidden = !keep;
      if (keep) count++;
    });
    shown.textContent = count === total ? total + " " + plural(total)
      : count + " of " + total + " " + plural(total) + " shown";
  }

  function rank(col, value) {
    return col === 0 ? VERDICTS.indexOf(value) : value;
  }

  function sort(button) {
    var th = button.parentNode;
    var col = +button.dataset.col;
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("thead th").forEach(function (other) {
      other.setAttribute("aria-sort", "none");
    });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
    rows.sort(function (a, b) {
      var x = rank(col, a.cells[col]), y = rank(col, b.cells[col]);
      var order = typeof x === "number" ? x - y : collator.compare(x, y);
      return (ascending ? order : -order) || a.index - b.index;
    });
    var fragment = document.createDocumentFragment();
    rows.forEach(function (row) { fragment.appendChild(row.tr); });
    body.appendChild(fragment);
  }

  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("submit", function (event) { event.preventDefault(); });
  form.addEventListener("reset", function () { setTimeout(apply, 0); });
  table.querySelectorAll("thead button").forEach(function (button) {
    button.addEventListener("click", function () { sort(button); });
  });
  document.documentElement.dataset.ready = "true";
})();
