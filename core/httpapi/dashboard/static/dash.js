// metaq dashboard: confirmations, auto-refresh, back links. No build step.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("form[data-confirm]").forEach(function (f) {
    f.addEventListener("submit", function (e) {
      if (!window.confirm(f.getAttribute("data-confirm"))) e.preventDefault();
    });
  });
  document.querySelectorAll("a[data-back]").forEach(function (a) {
    a.addEventListener("click", function (e) { e.preventDefault(); history.back(); });
  });
  var box = document.getElementById("autorefresh");
  if (box) {
    box.checked = localStorage.getItem("metaq.autorefresh") === "1";
    var timer = null;
    var arm = function () {
      if (timer) clearTimeout(timer);
      timer = box.checked ? setTimeout(function () { location.reload(); }, 5000) : null;
    };
    box.addEventListener("change", function () {
      localStorage.setItem("metaq.autorefresh", box.checked ? "1" : "0");
      arm();
    });
    arm();
  }
});
