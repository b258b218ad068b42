-- A small lending library: authors, their books, members and loans.
-- NULLs carry meaning: an unknown birth year or page count, a loan not yet returned.
CREATE TABLE author (
  author_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  country TEXT,              -- NULL when unknown
  birth_year INTEGER         -- NULL when unknown
);

CREATE TABLE book (
  book_id INTEGER PRIMARY KEY,
  title TEXT NOT NULL,
  author_id INTEGER NOT NULL REFERENCES author (author_id),
  genre TEXT NOT NULL,
  published_year INTEGER NOT NULL,
  pages INTEGER              -- NULL when unknown
);

CREATE TABLE member (
  member_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  city TEXT NOT NULL,
  joined_date TEXT NOT NULL  -- YYYY-MM-DD
);

CREATE TABLE loan (
  loan_id INTEGER PRIMARY KEY,
  book_id INTEGER NOT NULL REFERENCES book (book_id),
  member_id INTEGER NOT NULL REFERENCES member (member_id),
  loan_date TEXT NOT NULL,   -- YYYY-MM-DD
  return_date TEXT           -- NULL while the book is still out
);

INSERT INTO author VALUES
  (1, 'Ada Brennan', 'Ireland', 1948),
  (2, 'Tomas Lindqvist', 'Sweden', 1971),
  (3, 'Mei Chen', 'China', 1985),
  (4, 'Oskar Vogel', 'Germany', NULL),
  (5, 'Lucia Ferraro', 'Italy', 1962),
  (6, 'Kofi Mensah', 'Ghana', 1990),
  (7, 'Ruth Okafor', NULL, NULL),
  (8, 'Pablo Ortega', 'Spain', 1939);

INSERT INTO book VALUES
  (1, 'The Salt Road', 1, 'history', 1989, 412),
  (2, 'Harbour Lights', 1, 'fiction', 1996, 288),
  (3, 'Northern Algebra', 2, 'science', 2004, 530),
  (4, 'Quiet Fjords', 2, 'fiction', 2011, NULL),
  (5, 'Paper Lanterns', 3, 'fiction', 2015, 256),
  (6, 'Cells and Signals', 3, 'science', 2019, 610),
  (7, 'The Clockmaker', 4, 'fiction', 2001, 344),
  (8, 'Rivers of Iron', 4, 'history', 1993, 498),
  (9, 'Olive Summers', 5, 'fiction', 2008, 301),
  (10, 'A Short History of Glass', 5, 'history', 2013, NULL),
  (11, 'Market Day', 6, 'fiction', 2021, 198),
  (12, 'Counting Stars', 6, 'science', 2023, 275),
  (13, 'The Last Ferry', 1, 'fiction', 2006, 322),
  (14, 'Stone and Sea', 8, 'history', 1975, 389);

INSERT INTO member VALUES
  (1, 'Hannah Ward', 'Leeds', '2019-03-14'),
  (2, 'Sanjay Patel', 'York', '2020-07-01'),
  (3, 'Ines Moreau', 'Leeds', '2021-01-20'),
  (4, 'Jonas Berg', 'Hull', '2021-11-05'),
  (5, 'Grace Lee', 'York', '2022-02-28'),
  (6, 'Omar Haddad', 'Leeds', '2023-06-10'),
  (7, 'Nora Quinn', 'Hull', '2024-01-15');

INSERT INTO loan VALUES
  (1, 3, 1, '2022-01-10', '2022-01-30'),
  (2, 5, 1, '2022-03-02', '2022-03-20'),
  (3, 1, 2, '2022-05-15', '2022-06-01'),
  (4, 7, 3, '2022-09-09', '2022-10-01'),
  (5, 5, 2, '2023-01-04', '2023-01-25'),
  (6, 9, 1, '2023-02-11', '2023-03-01'),
  (7, 11, 4, '2023-03-19', '2023-04-02'),
  (8, 3, 5, '2023-05-23', '2023-06-20'),
  (9, 6, 1, '2023-07-07', '2023-07-29'),
  (10, 12, 3, '2023-08-30', '2023-09-15'),
  (11, 2, 6, '2023-10-12', '2023-11-03'),
  (12, 13, 1, '2023-12-01', '2024-01-05'),
  (13, 5, 4, '2024-01-20', '2024-02-10'),
  (14, 8, 2, '2024-02-14', NULL),
  (15, 11, 1, '2024-03-03', NULL),
  (16, 14, 6, '2024-03-18', '2024-04-01'),
  (17, 9, 5, '2024-04-09', NULL),
  (18, 6, 3, '2024-04-22', NULL);
