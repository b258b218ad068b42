-- The database the block-lint corpus's SQL examples run on (tests/blocks/test_blocks_corpus.py).
CREATE TABLE singer (
  singer_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  country TEXT,
  age INTEGER
);
CREATE TABLE stadium (
  stadium_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  city TEXT NOT NULL,
  capacity INTEGER
);
CREATE TABLE concert (
  concert_id INTEGER PRIMARY KEY,
  concert_name TEXT NOT NULL,
  year INTEGER NOT NULL,
  stadium_id INTEGER REFERENCES stadium (stadium_id)
);
CREATE TABLE singer_in_concert (
  concert_id INTEGER REFERENCES concert (concert_id),
  singer_id INTEGER REFERENCES singer (singer_id)
);
INSERT INTO singer VALUES (1, 'Joe Sharp', 'Netherlands', 52), (2, 'Timbaland', 'United States', 32),
  (3, 'Justin Brown', 'France', 29), (4, 'Rose White', 'France', 41), (5, 'John Nizinik', NULL, 43),
  (6, 'Tribal King', 'France', 25), (7, 'Ana Lima', NULL, NULL);
INSERT INTO stadium VALUES (1, 'Olympiastadion', 'Berlin', 74475), (2, 'Alte Foersterei', 'Berlin', 22012),
  (3, 'Estadio da Luz', 'Lisbon', 64642), (4, 'Parc des Princes', 'Paris', 47929);
INSERT INTO concert VALUES (1, 'Auditions', 2014, 1), (2, 'Super bootcamp', 2014, 2),
  (3, 'Home Visits', 2015, 3), (4, 'Week 1', 2014, 3), (5, 'Week 2', 2015, 4);
INSERT INTO singer_in_concert VALUES (1, 2), (1, 3), (1, 5), (2, 3), (2, 6), (3, 5), (4, 4), (5, 6), (5, 3);
