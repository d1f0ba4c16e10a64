-- why() needs a victim, and takes the victim forms of blame().
SELECT * FROM why();
SELECT * FROM why('pid:abc');
