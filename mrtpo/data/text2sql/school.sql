-- A small school: teachers, students with optional advisors, courses and enrollments.
-- NULLs carry meaning: a student with no advisor, a course with no teacher yet, and an
-- enrollment whose grade is NULL because the course is still running.
CREATE TABLE teacher (
  teacher_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  department TEXT NOT NULL
);

CREATE TABLE student (
  student_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  year INTEGER NOT NULL,     -- 1 to 4
  advisor_id INTEGER REFERENCES teacher (teacher_id)  -- NULL when none is assigned
);

CREATE TABLE course (
  course_id INTEGER PRIMARY KEY,
  title TEXT NOT NULL,
  department TEXT NOT NULL,
  credits INTEGER NOT NULL,
  teacher_id INTEGER REFERENCES teacher (teacher_id)  -- NULL when not yet assigned
);

CREATE TABLE enrollment (
  student_id INTEGER NOT NULL REFERENCES student (student_id),
  course_id INTEGER NOT NULL REFERENCES course (course_id),
  grade INTEGER,             -- 0 to 100; NULL while the course is still running
  PRIMARY KEY (student_id, course_id)
);

INSERT INTO teacher VALUES
  (1, 'Dr. Amara Diallo', 'Computer Science'),
  (2, 'Dr. Ben Hartley', 'Mathematics'),
  (3, 'Dr. Carmen Ruiz', 'Mathematics'),
  (4, 'Dr. David Okoye', 'Physics'),
  (5, 'Dr. Eva Novak', 'Computer Science');

INSERT INTO student VALUES
  (1, 'Liam Foster', 1, 1),
  (2, 'Maya Singh', 2, 2),
  (3, 'Noah Kim', 3, NULL),
  (4, 'Olivia Brown', 1, 3),
  (5, 'Priya Nair', 4, 1),
  (6, 'Quentin Roy', 2, NULL),
  (7, 'Rosa Alvarez', 3, 4),
  (8, 'Sam Taylor', 1, 2),
  (9, 'Tara Walsh', 4, 5);

INSERT INTO course VALUES
  (1, 'Databases', 'Computer Science', 6, 1),
  (2, 'Statistics', 'Mathematics', 5, 2),
  (3, 'Linear Algebra', 'Mathematics', 5, 2),
  (4, 'Mechanics', 'Physics', 6, 4),
  (5, 'Machine Learning', 'Computer Science', 6, 5),
  (6, 'Number Theory', 'Mathematics', 4, NULL),
  (7, 'Optics', 'Physics', 4, NULL);

INSERT INTO enrollment VALUES
  (1, 1, 78), (1, 2, 85), (1, 3, NULL),
  (2, 2, 91), (2, 3, 74),
  (3, 1, 88), (3, 4, 67), (3, 5, NULL), (3, 2, 70),
  (4, 3, 95),
  (5, 1, 82), (5, 5, 90), (5, 2, NULL),
  (6, 4, 58), (6, 7, 73),
  (7, 4, 81), (7, 7, NULL),
  (8, 1, NULL), (8, 6, 64),
  (9, 5, 97), (9, 1, 93);
