# list_sources(<out> <root> <dirs>): the C++ and CUDA sources (*.cpp, *.hpp, *.cu, *.cuh, *.h) under
# each of <dirs> in <root>, sorted: the files the source checks of this folder read.
function(list_sources out root dirs)
  set(files "")
  foreach(dir IN LISTS dirs)
    file(GLOB_RECURSE found ${root}/${dir}/*.cpp ${root}/${dir}/*.hpp ${root}/${dir}/*.cu ${root}/${dir}/*.cuh
         ${root}/${dir}/*.h)
    list(APPEND files ${found})
  endforeach()
  list(SORT files)
  set(${out} ${files} PARENT_SCOPE)
endfunction()
