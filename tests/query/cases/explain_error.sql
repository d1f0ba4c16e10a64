SELECT * FROM explain(99);
