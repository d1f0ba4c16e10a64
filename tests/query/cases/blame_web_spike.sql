-- blame() of web over the spike, every column: hog 90 %, <idle> the rest; pressure and
-- throttling of web's cgroups the same in every row.
SELECT * FROM blame('web', '2026-11-20 14:03', '2026-11-20 14:03:30');
