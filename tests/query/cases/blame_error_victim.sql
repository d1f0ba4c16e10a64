SELECT * FROM blame('tid:abc');
