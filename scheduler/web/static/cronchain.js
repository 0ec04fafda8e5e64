// cronchain serve's one script, shipped in the package: each exact time's title says it
// in the viewer's own zone too, which only the browser knows. Without it the page reads
// the same, in the job's zone and in UTC.
"use strict";
(function () {
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  var format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
  });
  document.querySelectorAll("time[datetime]").forEach(function (time) {
    var when = new Date(time.getAttribute("datetime"));
    if (isNaN(when.getTime())) return;
    var yours = "in your zone (" + zone + "): " + format.format(when);
    time.title = time.title ? time.title + "\n" + yours : yours;
  });
})();
