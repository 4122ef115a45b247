(function () {
  "use strict";
  var table = document.getElementById("queries");
  function openTarget() {
    var id = decodeURIComponent((location.hash || "").slice(1));
    var el = id ? document.getElementById(id) : null;
    if (el && el.classList.contains("q")) {
      el.hidden = false;
      var d = el.querySelector("details");
      if (d) { d.open = true; }
      el.scrollIntoView({block: "start"});
    }
  }
  window.addEventListener("hashchange", openTarget);
  if (!table) { return; }
  var bodies = Array.prototype.slice.call(table.tBodies);
  var headers = Array.prototype.slice.call(table.tHead.querySelectorAll("th[data-col]"));
  var count = document.getElementById("q-count");
  var filter = document.getElementById("q-filter");
  var stratum = document.getElementById("q-stratum");
  bodies.forEach(function (b) { b.dataset.text = b.textContent.toLowerCase(); });

  function key(b, col, type) {
    var cell = b.rows[0].cells[col];
    var v = cell ? cell.getAttribute("data-v") : "";
    if (type === "num") { return v === "" || v === null ? NaN : parseFloat(v); }
    return (v === null ? cell.textContent : v).toLowerCase();
  }
  function sortBy(th) {
    var col = parseInt(th.getAttribute("data-col"), 10);
    var type = th.getAttribute("data-type");
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    headers.forEach(function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    var decorated = bodies.map(function (b, i) { return [key(b, col, type), i, b]; });
    decorated.sort(function (x, y) {
      var a = x[0], c = y[0];
      var an = type === "num" && isNaN(a), cn = type === "num" && isNaN(c);
      if (an || cn) { return an === cn ? x[1] - y[1] : (an ? 1 : -1); }  // undefined always last
      if (a < c) { return -dir; }
      if (a > c) { return dir; }
      return x[1] - y[1];
    });
    decorated.forEach(function (d) { table.appendChild(d[2]); });
    bodies = decorated.map(function (d) { return d[2]; });
  }
  headers.forEach(function (th) {
    th.addEventListener("click", function () { sortBy(th); });
    th.addEventListener("keydown", function (e) {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(th); }
    });
  });
  function applyFilter() {
    var text = (filter.value || "").trim().toLowerCase();
    var s = stratum.value;
    var shown = 0;
    bodies.forEach(function (b) {
      var ok = (!s || b.getAttribute("data-stratum") === s) && (!text || b.dataset.text.indexOf(text) !== -1);
      b.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown === bodies.length ? bodies.length + " queries" : shown + " of " + bodies.length + " queries";
  }
  filter.addEventListener("input", applyFilter);
  stratum.addEventListener("change", applyFilter);
  openTarget();
  table.setAttribute("data-ready", "1");
})();
