// The app's search box: suggestions from /api/suggest as the user types
// (names set as option values, never as HTML); choosing one opens its page.
(function () {
  "use strict";
  var input = document.querySelector("[data-testid=app-search]");
  var list = document.getElementById("km-suggest");
  if (!input || !list) return;
  var urls = {}, timer = null, last = "";
  input.addEventListener("input", function () {
    var q = input.value.trim();
    if (urls[q]) { window.location.href = urls[q]; return; }
    clearTimeout(timer);
    timer = setTimeout(function () {
      if (q === last || q.length < 2) return;
      last = q;
      fetch("/api/suggest?q=" + encodeURIComponent(q)).then(function (r) { return r.json(); }).then(function (items) {
        if (!Array.isArray(items)) return;
        list.textContent = "";
        urls = {};
        items.forEach(function (it) {
          var o = document.createElement("option");
          o.value = it.name;
          o.label = it.kind;
          urls[it.name] = it.url;
          list.appendChild(o);
        });
      });
    }, 200);
  });
})();
