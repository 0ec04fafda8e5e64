// cronchain serve's one script, shipped in the package; the page reads the same without
// it, only still. Two things, in plain JavaScript (no library to ship or to keep):
// - each exact time's title says it in the viewer's own zone too, which only the
//   browser knows;
// - the parts of a page marked data-live (the jobs list, a job's slots and history) are
//   fetched again every few seconds while the tab is in view, and swapped in place: no
//   reload, so a filter or a reason being typed is kept, and a part holding the
//   keyboard's focus waits for the next round.
"use strict";
(function () {
  var EVERY = 5000; // ms between two fetches of a live page
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  var format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
  });

  function zoned(root) {
    root.querySelectorAll("time[datetime]").forEach(function (time) {
      var when = new Date(time.getAttribute("datetime"));
      if (isNaN(when.getTime()) || time.dataset.zoned) return;
      var yours = "in your zone (" + zone + "): " + format.format(when);
      time.title = time.title ? time.title + "\n" + yours : yours;
      time.dataset.zoned = "1";
    });
  }

  function refresh(parts) {
    if (document.hidden) return;
    fetch(location.href, { cache: "no-store", credentials: "same-origin" })
      .then(function (answer) { return answer.ok ? answer.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        parts.forEach(function (part) {
          var now = fresh.getElementById(part.id);
          if (now && !part.contains(document.activeElement)) {
            part.innerHTML = now.innerHTML;
            zoned(part);
          }
        });
        document.body.dataset.refreshed = String(Date.now());
      })
      .catch(function () {}); // the server away: the next round asks again
  }

  zoned(document);
  var parts = Array.prototype.slice.call(document.querySelectorAll("[data-live][id]"));
  if (parts.length) setInterval(refresh, EVERY, parts);
})();
