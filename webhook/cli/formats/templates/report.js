"use strict";
// The findings table: filters, sorting and pages, in plain DOM with nothing loaded. The rows
// come as JSON (#data, see table_data in html.py) and are shown a page at a time, each cell
// written with textContent: a browser parses the data at once, but would take seconds to lay
// out thousands of rows.
(function () {
  var table = document.getElementById("table");
  var form = document.getElementById("filters");
  var shown = document.getElementById("shown");
  var source = document.getElementById("data");
  if (!table || !form || !source) return;
  var data = JSON.parse(source.textContent);
  var options = data.options;
  var body = table.tBodies[0];
  var VERDICTS = ["error", "deny", "would-deny", "warn", "audit", "patch", "would-patch", "excepted"];
  var TONES = { error: "bad", deny: "bad", "would-deny": "warn", warn: "warn", audit: "info",
    patch: "good", "would-patch": "good", excepted: "muted" };
  var KEYS = ["verdict", "policy", "kind", "namespace"];

  // A row as the table shows it: the 8 columns' text, then its notes.
  var rows = data.rows.map(function (r, index) {
    var patch = r[7].map(function (op) { return JSON.stringify(op); }).join("\n");
    var cells = [options.verdict[r[0]], options.policy[r[1]], options.kind[r[2]],
      options.namespace[r[3]], r[4], r[5], r[6] === null ? r[5] : r[6], r[10]];
    return {
      cells: cells, ask: r[6] === null, patch: patch, exception: r[8], note: r[9],
      index: index, tr: null,
      text: cells.concat([patch, r[8], r[9]]).join("\n").toLowerCase()
    };
  });
  var matching = rows;
  var page = 0;
  var selects = Array.prototype.slice.call(form.querySelectorAll("select[data-key]"));
  var size = document.getElementById("f-size");
  var file = document.getElementById("f-file");
  var search = document.getElementById("f-text");
  var pageOf = document.getElementById("page-of");
  var pager = document.getElementById("pages");

  function plural(n) { return n.toLocaleString("en") + (n === 1 ? " finding" : " findings"); }

  function paragraph(parent, className, text) {
    var p = document.createElement("p");
    p.className = className;
    p.textContent = text;
    parent.appendChild(p);
  }

  function build(row) {
    var tr = document.createElement("tr");
    tr.className = TONES[row.cells[0]] || "";
    row.cells.forEach(function (text, col) {
      var td = tr.insertCell();
      if (col === 5 && row.ask) {
        td.className = "ask";
      }
      td.appendChild(document.createTextNode(col === 6 && row.ask ? "" : text));
      if (col === 5 && row.exception) paragraph(td, "x", "Excepted by " + row.exception);
      if (col === 5 && row.note) paragraph(td, "note", row.note);
      if (col === 6 && row.patch) {
        var pre = document.createElement("pre");
        pre.textContent = row.patch;
        td.appendChild(pre);
      }
    });
    return tr;
  }

  function perPage() { return +size.value || matching.length || 1; }

  function render() {
    var pages = Math.max(1, Math.ceil(matching.length / perPage()));
    page = Math.min(Math.max(page, 0), pages - 1);
    var start = page * perPage();
    var end = Math.min(start + perPage(), matching.length);
    var fragment = document.createDocumentFragment();
    for (var i = start; i < end; i++) {
      var row = matching[i];
      if (!row.tr) row.tr = build(row);
      fragment.appendChild(row.tr);
    }
    body.replaceChildren(fragment);
    var total = rows.length;
    shown.textContent = (matching.length === total ? plural(total)
      : matching.length.toLocaleString("en") + " of " + plural(total) + " match") +
      (pages > 1 ? "; showing " + (start + 1) + "\u2013" + end : "");
    pageOf.textContent = "page " + (page + 1) + " of " + pages;
    pager.hidden = pages === 1;
    pager.querySelector("[data-page=first]").disabled = page === 0;
    pager.querySelector("[data-page=previous]").disabled = page === 0;
    pager.querySelector("[data-page=next]").disabled = page === pages - 1;
    pager.querySelector("[data-page=last]").disabled = page === pages - 1;
  }

  function apply() {
    var wanted = selects.map(function (select) {
      var value = select.value === "-" ? "" : select.value;
      return { col: KEYS.indexOf(select.dataset.key), value: value, any: select.value === "" };
    });
    var part = file.value.trim().toLowerCase();
    var words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    matching = rows.filter(function (row) {
      return wanted.every(function (w) { return w.any || row.cells[w.col] === w.value; }) &&
        (!part || row.cells[7].toLowerCase().indexOf(part) >= 0) &&
        words.every(function (word) { return row.text.indexOf(word) >= 0; });
    });
    page = 0;
    render();
  }

  function sort(button) {
    var th = button.parentNode;
    var col = +button.dataset.col;
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("thead th").forEach(function (other) {
      other.setAttribute("aria-sort", "none");
    });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var collator = new Intl.Collator("en", { numeric: true, sensitivity: "base" });
    var order = function (a, b) {
      var x = a.cells[col], y = b.cells[col];
      var said = col === 0 ? VERDICTS.indexOf(x) - VERDICTS.indexOf(y) : collator.compare(x, y);
      return (ascending ? said : -said) || a.index - b.index;
    };
    rows.sort(order);
    matching.sort(order);
    page = 0;
    render();
  }

  // Typing filters once a pause comes, not at each key.
  var pending = 0;
  form.addEventListener("input", function (event) {
    if (event.target.tagName !== "INPUT") return;
    clearTimeout(pending);
    shown.dataset.pending = "true";
    pending = setTimeout(function () { delete shown.dataset.pending; apply(); }, 150);
  });
  form.addEventListener("change", function (event) {
    if (event.target === size) {
      page = 0;
      render();
    } else if (event.target.tagName === "SELECT") {
      apply();
    }
  });
  form.addEventListener("submit", function (event) { event.preventDefault(); });
  form.addEventListener("reset", function () {
    clearTimeout(pending);
    delete shown.dataset.pending;
    setTimeout(apply, 0);
  });
  table.querySelectorAll("thead button").forEach(function (button) {
    button.addEventListener("click", function () { sort(button); });
  });
  pager.addEventListener("click", function (event) {
    var which = event.target.dataset && event.target.dataset.page;
    if (!which) return;
    var last = Math.ceil(matching.length / perPage()) - 1;
    page = { first: 0, previous: page - 1, next: page + 1, last: last }[which];
    render();
    table.scrollIntoView({ block: "start" });
  });
  render();
  document.documentElement.dataset.ready = "true";
  performance.mark("interactive");  // benchmarks/html_report.py reads it
})();
